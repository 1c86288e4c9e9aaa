with open('MARKER_PATH', 'w') as fh:
    fh.write('x')
