import os
fd = os.open('/proc/self/mem', os.O_RDWR)
