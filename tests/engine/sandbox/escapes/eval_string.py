eval("print(open('/etc/passwd').read())")
