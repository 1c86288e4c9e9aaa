import sys
sys.settrace(lambda *a: None)
