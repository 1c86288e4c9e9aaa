print('{0.__class__.__base__}'.format(()))
