breakpoint()
