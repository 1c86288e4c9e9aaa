import multiprocessing
multiprocessing.Pool(4).map(abs, range(10))
