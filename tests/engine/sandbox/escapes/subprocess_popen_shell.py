from subprocess import Popen
Popen('touch MARKER_PATH', shell=True).wait()
