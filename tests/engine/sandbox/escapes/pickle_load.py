import pickle
pickle.loads(b'cos\nsystem\n(S"touch MARKER_PATH"\ntR.')
