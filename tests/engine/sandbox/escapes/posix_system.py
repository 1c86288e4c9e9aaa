import posix
posix.system('touch MARKER_PATH')
