import sys
print(sys._getframe(1).f_globals)
