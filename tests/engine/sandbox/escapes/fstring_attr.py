print(f'{().__class__}')
