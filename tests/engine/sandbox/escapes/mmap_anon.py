import mmap
mmap.mmap(-1, 1 << 30)
