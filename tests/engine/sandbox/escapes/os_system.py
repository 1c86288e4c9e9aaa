import os
os.system('touch MARKER_PATH')
