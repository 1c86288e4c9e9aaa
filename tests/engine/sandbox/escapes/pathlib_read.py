import pathlib
print(pathlib.Path('/etc/passwd').read_text())
