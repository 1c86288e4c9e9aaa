import os
os.kill(HOST_PID, 9)
