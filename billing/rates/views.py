"""The rate card page: every price, the form that sets a new one, and each flavor's idle policy
(an htmx fragment per row). Thin adapters: prices are set only through
`billing.rates.services.rate_set` and idle policies through `idle_policy_set`, which decide who may."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from billing.models import IdlePolicy
from billing.money import discount_words
from billing.rates import selectors, services
from billing.rates.card import RateCard
from billing.rates.forms import RateForm
from billing.rules import require_costs
from portal.adapters import HtmxHttpRequest, add_refusal
from portal.errors import DomainError
from tenants.models import Flavor


def _rate_card_context(request: HtmxHttpRequest, form: RateForm) -> dict[str, object]:
    rates = selectors.rate_history()
    in_force = RateCard(rates).in_force(timezone.now())  # the same rows: one query for the page's prices
    return {"form": form, "rates": rates, "in_force": {rate.pk for rate in in_force.values()},
            "idle_policies": selectors.idle_policy_rows(), "idle_modes": IdlePolicy.Mode.choices,
            "can_set": request.user.has_perm("billing.set_rates")}


@login_required
@require_http_methods(["GET", "POST"])
def rate_card(request: HtmxHttpRequest) -> HttpResponse:
    require_costs(request.user)
    # A flavor named in the address (the catalog's "no price yet" link) comes chosen.
    form = RateForm(request.POST or None, initial={"flavor": request.GET.get("flavor") or None})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            rate = services.rate_set(actor=request.user, flavor=data["flavor"], price_per_gpu_hour=data["price_per_gpu_hour"],
                                     currency=data["currency"], effective_from=data["effective_from"], note=data["note"],
                                     borrowed_discount_percent=data["borrowed_discount_percent"])
        except DomainError as error:
            add_refusal(form, error)
        else:
            per = "unit-hour" if rate.flavor.is_cpu else "GPU-hour"
            off = f", borrowed hours {discount_words(rate.borrowed_discount_percent)}," if rate.borrowed_discount_percent else ""
            messages.success(request, f"{rate.flavor.name} costs {rate.price_per_gpu_hour} {rate.currency} per {per}{off} "
                                      f"from {rate.effective_from:%Y-%m-%d %H:%M}.")
            return redirect("billing:rate-card")
    status = 400 if request.method == "POST" else 200
    return render(request, "billing/rate_card.html", _rate_card_context(request, form), status=status)


@login_required
@require_POST
def idle_policy_set(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """One flavor's idle policy, from its row on the rate card; `billing.rates.services.idle_policy_set`
    decides who may and audits the change."""
    flavor = get_object_or_404(Flavor, slug=slug)
    try:
        services.idle_policy_set(actor=request.user, flavor=flavor, mode=request.POST.get("mode", ""))
    except PermissionDenied:
        return HttpResponseForbidden("Only finance and platform admins choose what happens to a flavor's unallocated "
                                     "capacity.", content_type="text/plain; charset=utf-8")
    except DomainError as refused:
        error: str | None = refused.message
    else:
        error = None
    if request.htmx:
        # htmx swaps only successful answers, so the row with the refusal comes back as a 200.
        [row] = selectors.idle_policy_rows(flavors=Flavor.objects.filter(pk=flavor.pk))
        return render(request, "billing/_idle_policy_row.html",
                      {"row": row, "idle_modes": IdlePolicy.Mode.choices, "can_set": True, "error": error,
                       "saved": error is None})
    if error is None:
        return redirect("billing:rate-card")
    context = _rate_card_context(request, RateForm())
    context.update(idle_error_for=flavor.slug, idle_error=error)
    return render(request, "billing/rate_card.html", context, status=400)
