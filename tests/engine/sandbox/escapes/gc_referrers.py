import gc
print(gc.get_referrers(print))
