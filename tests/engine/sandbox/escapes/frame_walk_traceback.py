try:
    1 / 0
except ZeroDivisionError as e:
    tb = e.__traceback__
    print(tb.tb_frame.f_back.f_globals)
