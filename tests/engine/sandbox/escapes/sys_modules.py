import sys
sys.modules['os'].system('touch MARKER_PATH')
