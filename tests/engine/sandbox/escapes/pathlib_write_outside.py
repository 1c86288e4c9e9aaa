import pathlib
pathlib.Path('MARKER_PATH').write_text('x')
