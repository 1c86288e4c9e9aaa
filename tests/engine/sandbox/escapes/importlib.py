import importlib
importlib.import_module('os').system('touch MARKER_PATH')
