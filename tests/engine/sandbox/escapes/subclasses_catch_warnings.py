cls = [c for c in object.__subclasses__() if 'catch_warnings' in c.__name__][0]
cls()._module.__builtins__['__import__']('os').system('touch MARKER_PATH')
