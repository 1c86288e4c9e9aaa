import os
os.remove('SENTINEL_PATH')
