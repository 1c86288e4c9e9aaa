import os
print(open('/proc/%d/cmdline' % os.getppid()).read())
