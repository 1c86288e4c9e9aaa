__import__('os').system('touch MARKER_PATH')
