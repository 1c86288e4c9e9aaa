def gen():
    yield 1
g = gen()
print(g.gi_frame.f_back)
