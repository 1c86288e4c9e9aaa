for c in object.__subclasses__():
    if c.__name__ == 'Popen':
        c(['touch', 'MARKER_PATH'])
