import sys
sys.audit = None
import os
