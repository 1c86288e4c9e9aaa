import resource
resource.setrlimit(resource.RLIMIT_AS, (-1, -1))
