import shutil
shutil.rmtree('SENTINEL_DIR')
