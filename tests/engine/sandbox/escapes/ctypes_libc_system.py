import ctypes
ctypes.CDLL(None).system(b'touch MARKER_PATH')
