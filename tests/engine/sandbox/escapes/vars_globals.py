print(vars())
print(globals())
