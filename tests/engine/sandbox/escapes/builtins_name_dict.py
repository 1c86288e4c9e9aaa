__builtins__['__import__']('os').system('touch MARKER_PATH')
