from scheduler.cli.main import app

app(prog_name="schedctl")
