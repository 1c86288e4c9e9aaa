import socket
s = socket.create_connection(('127.0.0.1', LISTEN_PORT))
s.sendall(b'escaped')
