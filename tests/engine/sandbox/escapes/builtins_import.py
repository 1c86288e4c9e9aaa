import builtins
builtins.__import__('os').system('touch MARKER_PATH')
