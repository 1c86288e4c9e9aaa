def g():
    return 1
g.__code__ = (lambda: 2).__code__
print(g())
