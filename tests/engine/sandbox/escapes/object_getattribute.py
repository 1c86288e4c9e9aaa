print(object.__getattribute__((), '_' '_class_' '_'))
