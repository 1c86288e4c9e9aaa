import os
os.symlink('/etc/passwd', 'link')
print(open('link').read())
