import os
os.killpg(0, 9)
