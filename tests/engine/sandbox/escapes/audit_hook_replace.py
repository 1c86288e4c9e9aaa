import sys
sys.addaudithook(lambda *a: None)
