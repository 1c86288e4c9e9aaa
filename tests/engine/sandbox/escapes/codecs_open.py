import codecs
codecs.open('/etc/passwd').read()
