code = compile('1+1', 's', 'eval')
