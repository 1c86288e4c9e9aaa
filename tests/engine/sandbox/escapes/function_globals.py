def g():
    pass
print(g.__globals__)
