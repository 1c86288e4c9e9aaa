import subprocess
subprocess.run(['touch', 'MARKER_PATH'])
