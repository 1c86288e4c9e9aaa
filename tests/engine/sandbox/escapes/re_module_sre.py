import re
print(re.sre_compile)
