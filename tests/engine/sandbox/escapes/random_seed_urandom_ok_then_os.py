import random
print(random.__builtins__)
