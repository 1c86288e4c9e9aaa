import ctypes.util
print(ctypes.util.find_library('c'))
