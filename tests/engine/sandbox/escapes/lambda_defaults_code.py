f = lambda: 1
print(f.__code__.co_consts)
