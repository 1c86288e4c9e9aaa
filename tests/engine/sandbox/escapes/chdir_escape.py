import os
os.chdir('/')
os.listdir('.')
