import io
print(io.open('/etc/passwd').read())
