exec('import os')
