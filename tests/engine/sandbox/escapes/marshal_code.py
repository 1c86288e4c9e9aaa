import marshal
marshal.loads(b'')
