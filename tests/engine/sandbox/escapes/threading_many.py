import threading
for _ in range(10000):
    threading.Thread(target=lambda: None).start()
