def deco(fn):
    return fn.__globals__
@deco
def g():
    pass
