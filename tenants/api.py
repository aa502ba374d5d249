from rest_framework.routers import BaseRouter


def register(router: BaseRouter) -> None:
    pass
