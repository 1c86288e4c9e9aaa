print(getattr((), '_' + '_class_' + '_'))
