t = type(0)
for c in t.__mro__[-1].__subclasses__():
    print(c)
